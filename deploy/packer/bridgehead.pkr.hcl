# The bridgehead gateway image, built in Azure with Packer's azure-arm
# builder: the same recipe as `make image` (deploy/image/customize.sh, the
# packages of deploy/image/packages.txt, the bridgehead .deb), applied to
# Debian 12's Azure image, then generalized. The result is a managed image
# (and, with gallery_* set, an Azure Compute Gallery version) for
# deploy/azure/gateway.bicep's imageId.
#
#   make deb
#   packer init deploy/packer          # packer >= 1.7 only
#   packer build \
#     -var subscription_id=$(az account show --query id -o tsv) \
#     -var resource_group=bridgehead-images \
#     -var deb=$(ls out/bridgehead_*_amd64.deb) \
#     deploy/packer
#
# Authentication: the Azure CLI login (az login) by default.

variable "subscription_id" {
  type        = string
  description = "Subscription of the build VM and of the image."
}

variable "resource_group" {
  type        = string
  description = "Existing resource group that receives the managed image."
}

variable "location" {
  type        = string
  default     = "westeurope"
  description = "Region of the build VM and the image."
}

variable "deb" {
  type        = string
  description = "Path of the bridgehead .deb to install (make deb)."
}

variable "image_name" {
  type        = string
  default     = "bridgehead-gateway"
  description = "Name of the managed image; a timestamp is appended."
}

variable "vm_size" {
  type        = string
  default     = "Standard_D2s_v5"
  description = "Size of the temporary build VM."
}

variable "gallery_name" {
  type        = string
  default     = ""
  description = "Azure Compute Gallery to publish to; empty: managed image only."
}

variable "gallery_image_name" {
  type        = string
  default     = "bridgehead-gateway"
  description = "Image definition in that gallery (Linux, generalized, Gen2)."
}

variable "gallery_image_version" {
  type        = string
  default     = "1.0.0"
  description = "Version to publish in the gallery."
}

locals {
  stamp = formatdate("YYYYMMDDhhmmss", timestamp())
}

source "azure-arm" "gateway" {
  use_azure_cli_auth = true
  subscription_id    = var.subscription_id
  location           = var.location
  vm_size            = var.vm_size

  os_type         = "Linux"
  image_publisher = "Debian"
  image_offer     = "debian-12"
  image_sku       = "12-gen2"
  image_version   = "latest"

  managed_image_name                = "${var.image_name}-${local.stamp}"
  managed_image_resource_group_name = var.resource_group

  dynamic "shared_image_gallery_destination" {
    for_each = var.gallery_name == "" ? [] : [var.gallery_name]
    content {
      subscription         = var.subscription_id
      resource_group       = var.resource_group
      gallery_name         = shared_image_gallery_destination.value
      image_name           = var.gallery_image_name
      image_version        = var.gallery_image_version
      replication_regions  = [var.location]
      storage_account_type = "Standard_LRS"
    }
  }

  azure_tags = {
    role   = "bridgehead-gateway"
    source = "deploy/packer"
  }
}

build {
  sources = ["source.azure-arm.gateway"]

  provisioner "shell" {
    inline = ["mkdir -p /tmp/bridgehead-image/overlay"]
  }

  # The recipe, uploaded as in the repository.
  provisioner "file" {
    source      = "${path.root}/../image/overlay/"
    destination = "/tmp/bridgehead-image/overlay"
  }
  provisioner "file" {
    sources     = ["${path.root}/../image/customize.sh", "${path.root}/../image/packages.txt", var.deb]
    destination = "/tmp/bridgehead-image/"
  }

  provisioner "shell" {
    execute_command = "chmod +x {{ .Path }}; sudo env {{ .Vars }} {{ .Path }}"
    environment_vars = [
      "DEBIAN_FRONTEND=noninteractive",
      "DEB=/tmp/bridgehead-image/${basename(var.deb)}",
    ]
    inline = [
      "set -eu",
      "apt-get update",
      "apt-get -y upgrade",
      "apt-get install -y --no-install-recommends $(sed 's/#.*//' /tmp/bridgehead-image/packages.txt)",
      "sh /tmp/bridgehead-image/customize.sh / \"$DEB\"",
      "apt-get clean",
      "rm -rf /tmp/bridgehead-image",
    ]
  }

  # Generalize: the Azure agent removes the build user, host keys and
  # provisioning state, so each VM provisions itself afresh.
  provisioner "shell" {
    execute_command = "chmod +x {{ .Path }}; sudo env {{ .Vars }} {{ .Path }}"
    inline          = ["/usr/sbin/waagent -force -deprovision+user && export HISTSIZE=0 && sync"]
    skip_clean      = true
  }
}
