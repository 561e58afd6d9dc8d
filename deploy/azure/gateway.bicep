// The bridgehead gateways of one site: a scale set of gateway VMs from the
// bridgehead image (deploy/image, deploy/packer) in the site's subnet, NICs
// with IP forwarding, a public IP per instance from one public IP prefix,
// an NSG admitting the tunnel UDP port only from the peer sites' gateways,
// an internal Standard load balancer with an HA-ports rule and a /readyz
// health probe, and a route table sending the remote sites' node and pod
// CIDRs to the load balancer (attach it to the AKS node subnet).
//
// gateway.json is this file compiled (`az bicep build --file
// deploy/azure/gateway.bicep`); deploy/azure_test.go checks that both
// declare the same parameters, resources and outputs.

@description('Region of every resource.')
param location string = resourceGroup().location

@description('The site\'s name, as in bridgehead.yaml (sites[].name); prefixes every resource name.')
@minLength(1)
@maxLength(30)
param siteName string

@description('Resource ID of the existing subnet of the site\'s gateways (the AKS node subnet or one next to it).')
param subnetId string

@description('Static private IP of the internal load balancer in that subnet: the next hop of the routes to the remote sites.')
param loadBalancerFrontendIp string

@description('Node and pod CIDRs of every other site, e.g. ["192.168.40.0/24", "10.245.0.0/16"]. One route each, to the load balancer.')
@minLength(1)
param remoteSiteCidrs array

@description('Public addresses or prefixes of the other sites\' gateways (their publicIpPrefix output, or on-premises gateway addresses). Only they may send to the tunnel port.')
@minLength(1)
param peerGatewayAddresses array

@description('Number of gateways. Each has its own key and public IP; add new ones to the catalog before they carry traffic.')
@minValue(1)
@maxValue(16)
param instanceCount int = 2

@description('Length of the public IP prefix the instances\' addresses come from: 31 = 2 addresses, 30 = 4, 29 = 8, 28 = 16. At least instanceCount addresses.')
@minValue(28)
@maxValue(31)
param publicIpPrefixLength int = 30

@description('VM size. It must support accelerated networking when that is enabled.')
param vmSize string = 'Standard_D2s_v5'

param acceleratedNetworking bool = true

@description('Resource ID of the bridgehead gateway image: a managed image or an Azure Compute Gallery image version made from out/image/bridgehead.vhd or by deploy/packer.')
param imageId string

param adminUsername string = 'bridgehead'

@description('OpenSSH public key of the admin user; the image refuses passwords and root logins.')
param sshPublicKey string

@description('cloud-init user data for every instance (az: cloudInit=@gw.yaml), e.g. a cloud-config whose write_files puts the config in /etc/bridgehead/bridgehead.yaml (the image has the package; deploy/cloud-init/gateway.yaml is for a stock image). Empty: the gateways boot, generate their keys and wait for a config.')
param cloudInit string = ''

@description('UDP port of the tunnel; must match listen in bridgehead.yaml.')
@minValue(1)
@maxValue(65535)
param tunnelPort int = 51820

@description('TCP port of the gateways\' /readyz; metrics.listen in bridgehead.yaml must be 0.0.0.0:<port> (the default 127.0.0.1 is not reachable by the probe).')
@minValue(1)
@maxValue(65535)
param healthPort int = 9641

var prefix = 'bh-${siteName}'
var nsgName = '${prefix}-gw-nsg'
var routeTableName = '${prefix}-routes'
var lbName = '${prefix}-gw-lb'
var ipPrefixName = '${prefix}-gw-ips'
var vmssName = '${prefix}-gw'
var lbId = resourceId('Microsoft.Network/loadBalancers', lbName)

resource nsg 'Microsoft.Network/networkSecurityGroups@2023-09-01' = {
  name: nsgName
  location: location
  properties: {
    securityRules: [
      {
        name: 'allow-bridgehead-tunnel'
        properties: {
          description: 'bridgehead tunnel datagrams from the other sites\' gateways only'
          priority: 100
          direction: 'Inbound'
          access: 'Allow'
          protocol: 'Udp'
          sourceAddressPrefixes: peerGatewayAddresses
          sourcePortRange: '*'
          destinationAddressPrefix: '*'
          destinationPortRange: string(tunnelPort)
        }
      }
      {
        name: 'allow-readyz-probe'
        properties: {
          description: 'The load balancer\'s health probe on /readyz'
          priority: 110
          direction: 'Inbound'
          access: 'Allow'
          protocol: 'Tcp'
          sourceAddressPrefix: 'AzureLoadBalancer'
          sourcePortRange: '*'
          destinationAddressPrefix: '*'
          destinationPortRange: string(healthPort)
        }
      }
      {
        name: 'deny-internet-inbound'
        properties: {
          description: 'Nothing else from the internet reaches the gateways\' public IPs (no SSH: use Bastion or the VNet)'
          priority: 4000
          direction: 'Inbound'
          access: 'Deny'
          protocol: '*'
          sourceAddressPrefix: 'Internet'
          sourcePortRange: '*'
          destinationAddressPrefix: '*'
          destinationPortRange: '*'
        }
      }
    ]
  }
}

resource ipPrefix 'Microsoft.Network/publicIPPrefixes@2023-09-01' = {
  name: ipPrefixName
  location: location
  sku: {
    name: 'Standard'
    tier: 'Regional'
  }
  properties: {
    prefixLength: publicIpPrefixLength
    publicIPAddressVersion: 'IPv4'
  }
}

resource lb 'Microsoft.Network/loadBalancers@2023-09-01' = {
  name: lbName
  location: location
  sku: {
    name: 'Standard'
    tier: 'Regional'
  }
  properties: {
    frontendIPConfigurations: [
      {
        name: 'gateways'
        properties: {
          subnet: {
            id: subnetId
          }
          privateIPAllocationMethod: 'Static'
          privateIPAddress: loadBalancerFrontendIp
          privateIPAddressVersion: 'IPv4'
        }
      }
    ]
    backendAddressPools: [
      {
        name: 'gateways'
      }
    ]
    probes: [
      {
        name: 'readyz'
        properties: {
          protocol: 'Http'
          port: healthPort
          requestPath: '/readyz'
          intervalInSeconds: 5
          numberOfProbes: 2
          probeThreshold: 2
        }
      }
    ]
    loadBalancingRules: [
      {
        name: 'ha-ports'
        properties: {
          frontendIPConfiguration: {
            id: '${lbId}/frontendIPConfigurations/gateways'
          }
          backendAddressPool: {
            id: '${lbId}/backendAddressPools/gateways'
          }
          probe: {
            id: '${lbId}/probes/readyz'
          }
          protocol: 'All'
          frontendPort: 0
          backendPort: 0
          enableFloatingIP: false
          idleTimeoutInMinutes: 15
          loadDistribution: 'Default'
        }
      }
    ]
  }
}

resource routeTable 'Microsoft.Network/routeTables@2023-09-01' = {
  name: routeTableName
  location: location
  properties: {
    disableBgpRoutePropagation: false
    routes: [for cidr in remoteSiteCidrs: {
      name: 'bridgehead-${replace(replace(cidr, '/', '_'), ':', '-')}'
      properties: {
        addressPrefix: cidr
        nextHopType: 'VirtualAppliance'
        nextHopIpAddress: loadBalancerFrontendIp
      }
    }]
  }
}

resource vmss 'Microsoft.Compute/virtualMachineScaleSets@2024-03-01' = {
  name: vmssName
  location: location
  dependsOn: [
    lb
  ]
  sku: {
    name: vmSize
    tier: 'Standard'
    capacity: instanceCount
  }
  properties: {
    orchestrationMode: 'Uniform'
    // Each instance generates its own key at first boot: no spare
    // instances that would come and go, no automatic reimage.
    overprovision: false
    singlePlacementGroup: true
    upgradePolicy: {
      mode: 'Manual'
    }
    virtualMachineProfile: {
      storageProfile: {
        imageReference: {
          id: imageId
        }
        osDisk: {
          createOption: 'FromImage'
          caching: 'ReadWrite'
          managedDisk: {
            storageAccountType: 'Premium_LRS'
          }
        }
      }
      osProfile: {
        computerNamePrefix: vmssName
        adminUsername: adminUsername
        customData: empty(cloudInit) ? null : base64(cloudInit)
        linuxConfiguration: {
          disablePasswordAuthentication: true
          provisionVMAgent: true
          ssh: {
            publicKeys: [
              {
                path: '/home/${adminUsername}/.ssh/authorized_keys'
                keyData: sshPublicKey
              }
            ]
          }
        }
      }
      networkProfile: {
        networkInterfaceConfigurations: [
          {
            name: 'gateway'
            properties: {
              primary: true
              enableIPForwarding: true
              enableAcceleratedNetworking: acceleratedNetworking
              networkSecurityGroup: {
                id: nsg.id
              }
              ipConfigurations: [
                {
                  name: 'gateway'
                  properties: {
                    primary: true
                    subnet: {
                      id: subnetId
                    }
                    publicIPAddressConfiguration: {
                      name: 'tunnel'
                      sku: {
                        name: 'Standard'
                        tier: 'Regional'
                      }
                      properties: {
                        idleTimeoutInMinutes: 15
                        publicIPPrefix: {
                          id: ipPrefix.id
                        }
                      }
                    }
                    loadBalancerBackendAddressPools: [
                      {
                        id: '${lbId}/backendAddressPools/gateways'
                      }
                    ]
                  }
                }
              ]
            }
          }
        ]
      }
      diagnosticsProfile: {
        bootDiagnostics: {
          enabled: true
        }
      }
    }
  }
}

output scaleSetName string = vmssName
output publicIpPrefix string = ipPrefix.properties.ipPrefix
output loadBalancerFrontendIp string = loadBalancerFrontendIp
output routeTableId string = routeTable.id
